#include "quality/tasks.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class TasksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/tasks_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
    return dir_ + "/" + name;
  }
  std::string dir_;
};

TEST_F(TasksTest, TemplatesReadFieldsIndicesAndFilters) {
  const std::string doc =
      R"({"q": "Who?", "a": {"aliases": ["Ann", "Anne"]}, "n": 3, "b": true,
          "ctx_b": "tHE cat", "s": "The _ sat down."})";
  EXPECT_EQ(*RenderTemplate("Q: {{q}} {{ a.aliases[1] }} {{n}} {{b}}", doc), "Q: Who? Anne 3 True");
  EXPECT_EQ(*RenderTemplate("{{ctx_b|capitalize}}", doc), "The cat");
  EXPECT_EQ(*RenderTemplate("[{{s|before:_}}][{{s|after:_|strip}}]", doc), "[The ][sat down.]");
  auto missing = RenderTemplate("{{question}}", doc);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("field 'question' does not exist"));
  EXPECT_THAT(RenderTemplate("{{a.aliases}}", doc).status().message(), HasSubstr("is a list"));
  EXPECT_THAT(RenderTemplate("{{q|upper}}", doc).status().message(), HasSubstr("unknown template filter"));
}

// ARC's layout: choices.text, labels in choices.label, answerKey a label.
TEST_F(TasksTest, MultipleChoiceWithLabelsAndRewrites) {
  Write("arc.jsonl",
        R"({"question": "Sky colour?", "choices": {"text": ["blue", "red [x]"], "label": ["A", "B"]}, "answerKey": "A"})"
        "\n\n"
        R"({"question": "Grass?", "choices": {"text": ["green", "pink"], "label": ["1", "2"]}, "answerKey": "1"})"
        "\n");
  const std::string cfg = Write("arc.textproto", R"(
    data: "arc.jsonl" context: "Question: {{question}}\nAnswer:"
    choices_field: "choices.text" gold_field: "answerKey" gold_labels_field: "choices.label"
    rewrite { regex: " \\[.*?\\]" with: "" })");
  auto task = LoadTask(cfg);
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->config.name(), "arc");
  ASSERT_EQ(task->items.size(), 2u);
  const TaskItem& a = task->items[0];
  EXPECT_THAT(a.contexts, ElementsAre("Question: Sky colour?\nAnswer:", "Question: Sky colour?\nAnswer:"));
  EXPECT_THAT(a.continuations, ElementsAre(" blue", " red"));
  EXPECT_EQ(a.gold, 0);
  EXPECT_EQ(task->items[1].line, 3);  // the blank line is skipped, lines still count
  EXPECT_EQ(task->items[1].gold, 0);
  EXPECT_EQ(LoadTask(cfg, /*limit=*/1)->items.size(), 1u);
}

// Few-shot examples are drawn as the harness draws them: one
// random.Random(1234) for the run, sample(docs, k + 1) per document, the
// document itself dropped. Python gives, for 10 documents and k = 2:
//   doc 0: sample [7, 1, 0] -> [7, 1]; doc 1: [1, 0, 9] -> [0, 9];
//   doc 2: [1, 5, 3] -> [1, 5].
TEST_F(TasksTest, FewShotExamplesAreTheHarnesss) {
  std::string lines;
  for (int i = 0; i < 10; ++i) lines += "{\"x\": \"q" + std::to_string(i) + "\", \"y\": " + std::to_string(i % 2) + "}\n";
  Write("d.jsonl", lines);
  const std::string cfg = Write("fs.textproto", R"(
    data: "d.jsonl" description: "D\n" context: "{{x}}:" choice: "no" choice: "yes" gold_field: "y"
    num_fewshot: 2)");
  auto task = LoadTask(cfg, 3);
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->items[0].contexts[0], "D\nq7: yes\n\nq1: yes\n\nq0:");
  EXPECT_EQ(task->items[1].contexts[0], "D\nq0: no\n\nq9: yes\n\nq1:");
  EXPECT_EQ(task->items[2].contexts[0], "D\nq1: yes\n\nq5: yes\n\nq2:");
}

// WinoGrande: each option completes the sentence up to the blank, and the
// rest of the sentence is the one continuation scored after each.
TEST_F(TasksTest, ChoicesAsContexts) {
  Write("w.jsonl", R"({"sentence": "Ann gave Bo a gift because _ was kind.", "option1": "Ann", "option2": "Bo", "answer": "1"})" "\n");
  const std::string cfg = Write("w.textproto", R"(
    data: "w.jsonl" choices_are_contexts: true
    choice: "{{sentence|before:_}}{{option1}}" choice: "{{sentence|before:_}}{{option2}}"
    target: "{{sentence|after:_|strip}}" gold_field: "answer" gold_labels: "1" gold_labels: "2")");
  auto task = LoadTask(cfg);
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_THAT(task->items[0].contexts, ElementsAre("Ann gave Bo a gift because Ann", "Ann gave Bo a gift because Bo"));
  EXPECT_THAT(task->items[0].continuations, ElementsAre(" was kind.", " was kind."));
}

TEST_F(TasksTest, BadDataNamesFileLineAndField) {
  const std::string cfg = Write("t.textproto",
                                R"(data: "t.jsonl" context: "{{q}}" choices_field: "c" gold_field: "g")");
  auto load = [&](const std::string& jsonl) {
    Write("t.jsonl", jsonl);
    auto t = LoadTask(cfg);
    return t.ok() ? std::string("ok") : std::string(t.status().message());
  };
  const std::string data = dir_ + "/t.jsonl";
  EXPECT_THAT(load(R"({"q": "a", "c": ["x", "y"]})" "\n"), HasSubstr(data + ":1: gold_field: field 'g' does not exist"));
  EXPECT_THAT(load(R"({"q": "a", "c": ["x", "y"], "g": 0})" "\n" R"({"q": "a", "c": ["x", "y"], "g": 2})" "\n"),
              HasSubstr(data + ":2: gold 2 (field 'g') is out of range for 2 choices"));
  EXPECT_THAT(load(R"({"q": "a", "c": [], "g": 0})" "\n"), HasSubstr(data + ":1: no choices"));
  EXPECT_THAT(load(R"({"z": "a", "c": ["x"], "g": 0})" "\n"), HasSubstr(data + ":1: context: field 'q' does not exist"));
  EXPECT_THAT(load("{not json\n"), HasSubstr(data + ":1: not valid JSON"));
  EXPECT_THAT(load(R"({"q": "a", "c": ["x"], "g": "B"})" "\n"), HasSubstr("is not an index"));
  // A data file that is not there: where it is expected, and that hilnas
  // never downloads it.
  fs::remove(data);
  auto missing = LoadTask(cfg);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr(data + " does not exist"));
  EXPECT_THAT(missing.status().message(), HasSubstr("never downloads"));
  // Configs that cannot work are refused naming the field.
  const std::string no_gold = Write("n.textproto", R"(data: "t.jsonl" context: "{{q}}" choice: "a")");
  EXPECT_THAT(LoadTask(no_gold).status().message(), HasSubstr("'gold_field' is not set"));
  const std::string typo = Write("typo.textproto", R"(data: "t.jsonl" contxt: "{{q}}")");
  EXPECT_THAT(LoadTask(typo).status().message(), HasSubstr("contxt"));
}

TEST_F(TasksTest, ExactMatchNormalisesAsTheHarness) {
  TaskConfig c;
  c.add_until("\n");
  c.add_until(".");
  c.set_ignore_case(true);
  c.set_ignore_punctuation(true);
  c.add_regexes_to_ignore(R"(\b(?:The |the |An |A |a |an ))");
  EXPECT_EQ(CutAtStop(c, " Paris, France.\nQ: next"), "Paris, France");
  EXPECT_TRUE(ExactMatch(c, "The Eiffel-Tower", {"eiffel tower", "eiffeltower"}));
  EXPECT_FALSE(ExactMatch(c, "Eiffel", {"eiffel tower"}));
  TaskConfig strict;
  EXPECT_FALSE(ExactMatch(strict, "paris", {"Paris"}));
}

TEST(MeanStderrTest, SampleStandardDeviationOverRootN) {
  EXPECT_DOUBLE_EQ(MeanStderr({1, 0, 1, 1}), 0.25);
  EXPECT_EQ(MeanStderr({1}), 0);
}

}  // namespace
}  // namespace hilnas
