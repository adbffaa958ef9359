#include "quality/tasks.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"

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

// The nine shipped configs (configs/tasks/) read documents in the public
// copies' field layouts and build the harness's prompts for them.
TEST_F(TasksTest, ShippedConfigsReadThePublicLayouts) {
  const std::string configs = std::string(HILNAS_SOURCE_DIR) + "/configs/tasks";
  for (const auto& f : fs::directory_iterator(configs)) {
    if (f.path().extension() == ".textproto") fs::copy_file(f.path(), dir_ + "/" + f.path().filename().string());
  }
  auto data = [&](const std::string& rel, const std::string& lines) {
    fs::create_directories(fs::path(dir_ + "/" + rel).parent_path());
    std::ofstream(dir_ + "/" + rel) << lines;
  };
  auto load = [&](const std::string& name) {
    auto t = LoadTask(dir_ + "/" + name + ".textproto");
    EXPECT_TRUE(t.ok()) << name << ": " << t.status();
    return t.ok() ? *std::move(t) : Task{};
  };
  // A missing file names where it is expected.
  auto missing = LoadTask(dir_ + "/piqa.textproto");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr(dir_ + "/data/piqa/validation.jsonl does not exist"));

  data("data/hellaswag/validation.jsonl",
       R"({"ind": 4, "activity_label": "Home and Garden", "ctx_a": "[header] How to grow tomatoes [title] Pick a sunny spot.", "ctx_b": "", "ctx": "", "endings": [" [step] Water daily. ", "Dig a hole [title] Plant.", "c", "d"], "source_id": "x", "split": "val", "split_type": "indomain", "label": "1"})"
       "\n"
       R"({"ind": 5, "activity_label": "Removing ice from car", "ctx_a": "Then, the man writes over the snow.", "ctx_b": "tHEN", "ctx": "", "endings": ["a", "b", "c", "d"], "source_id": "x", "split": "val", "split_type": "indomain", "label": "0"})"
       "\n");
  Task hs = load("hellaswag");
  ASSERT_EQ(hs.items.size(), 2u);
  // Python: preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize()).
  EXPECT_EQ(hs.items[0].contexts[0], "Home and Garden: How to grow tomatoes. Pick a sunny spot.");
  EXPECT_THAT(hs.items[0].continuations, ElementsAre("  Water daily.", " Dig a hole. Plant.", " c", " d"));
  EXPECT_EQ(hs.items[0].gold, 1);
  EXPECT_EQ(hs.items[1].contexts[0], "Removing ice from car: Then, the man writes over the snow. Then");

  data("data/boolq/validation.jsonl", R"({"question": "is it wet", "passage": "Rain.", "idx": 0, "label": 1})" "\n");
  EXPECT_EQ(load("boolq").items[0].contexts[0], "Rain.\nQuestion: is it wet?\nAnswer:");
  data("data/piqa/validation.jsonl", R"({"goal": "Open a jar", "sol1": "Twist.", "sol2": "Eat.", "label": 0})" "\n");
  EXPECT_THAT(load("piqa").items[0].continuations, ElementsAre(" Twist.", " Eat."));
  data("data/siqa/validation.jsonl",
       R"({"context": "Ann ran.", "question": "Why?", "answerA": "late", "answerB": "fun", "answerC": "rain", "label": "3"})" "\n");
  Task siqa = load("siqa");
  EXPECT_EQ(siqa.items[0].contexts[0], "Q: Ann ran. Why?\nA:");
  EXPECT_EQ(siqa.items[0].gold, 2);
  data("data/winogrande/validation.jsonl",
       R"({"sentence": "The cup fell off the shelf because _ was unstable.", "option1": "cup", "option2": "shelf", "answer": "2"})" "\n");
  Task wg = load("winogrande");
  EXPECT_THAT(wg.items[0].contexts, ElementsAre("The cup fell off the shelf because cup", "The cup fell off the shelf because shelf"));
  EXPECT_THAT(wg.items[0].continuations, ElementsAre(" was unstable.", " was unstable."));
  EXPECT_EQ(wg.items[0].gold, 1);
  const std::string arc = R"({"id": "q", "question": "Q?", "choices": {"text": ["x", "y", "z"], "label": ["A", "B", "C"]}, "answerKey": "C"})" "\n";
  data("data/arc_easy/test.jsonl", arc);
  EXPECT_EQ(load("arc_easy").items[0].gold, 2);
  std::string train;
  for (int i = 0; i < 30; ++i) {
    train += R"({"id": "t)" + std::to_string(i) + R"(", "question": "T)" + std::to_string(i) +
             R"(?", "choices": {"text": ["a", "b"], "label": ["1", "2"]}, "answerKey": "2"})" "\n";
  }
  data("data/arc_challenge/test.jsonl", arc);
  data("data/arc_challenge/train.jsonl", train);
  Task ac = load("arc_challenge");
  const std::string& prompt = ac.items[0].contexts[0];
  // 25 examples "Question: T<i>?\nAnswer: b", then the question.
  size_t shots = 0;
  for (size_t at = prompt.find("\nAnswer: b\n\n"); at != std::string::npos; at = prompt.find("\nAnswer: b\n\n", at + 1)) ++shots;
  EXPECT_EQ(shots, 25u);
  EXPECT_TRUE(absl::EndsWith(prompt, "\n\nQuestion: Q?\nAnswer:")) << prompt;

  std::string tq_train, nq_train;
  for (int i = 0; i < 6; ++i) {
    tq_train += R"({"question": "T)" + std::to_string(i) + R"(", "answer": {"aliases": ["A)" + std::to_string(i) + R"(", "B"], "value": "A"}})" "\n";
    nq_train += R"({"question": "n)" + std::to_string(i) + R"(", "answer": ["x)" + std::to_string(i) + R"("]})" "\n";
  }
  data("data/triviaqa/validation.jsonl", R"({"question": "Who", "answer": {"aliases": ["Ann", "Anne"], "value": "Ann"}})" "\n");
  data("data/triviaqa/train.jsonl", tq_train);
  Task tq = load("triviaqa");
  EXPECT_THAT(tq.items[0].answers, ElementsAre("Ann", "Anne"));
  EXPECT_TRUE(absl::EndsWith(tq.items[0].contexts[0], "\n\nQuestion: Who?\nAnswer:"));
  EXPECT_NE(tq.items[0].contexts[0].find("?\nAnswer: A"), std::string::npos);  // an example's first alias
  data("data/nq_open/validation.jsonl", R"({"question": "where", "answer": ["here"]})" "\n");
  data("data/nq_open/train.jsonl", nq_train);
  Task nq = load("nq_open");
  EXPECT_TRUE(absl::StartsWith(nq.items[0].contexts[0], "Answer these questions:\n\nQ: n")) << nq.items[0].contexts[0];
  EXPECT_TRUE(ExactMatch(nq.config, "The Here", {"here"}));
}

TEST(MeanStderrTest, SampleStandardDeviationOverRootN) {
  EXPECT_DOUBLE_EQ(MeanStderr({1, 0, 1, 1}), 0.25);
  EXPECT_EQ(MeanStderr({1}), 0);
}

}  // namespace
}  // namespace hilnas
