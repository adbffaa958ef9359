// libhilnas_spm.so: Google's SentencePiece behind a C interface, loaded by
// sentencepiece_model.cc with dlmopen(LM_ID_NEWLM): a link namespace of its
// own, with its own libstdc++.
//
// Why a separate shared object: Debian's libsentencepiece.so carries and
// exports its own copy of protobuf-lite, while every hilnas binary links the
// system libprotobuf through gRPC. Linked side by side, one copy's symbols
// interpose the other's and the first model load aborts in protobuf's
// initialisation (seen: "CHECK failed: scc->visit_status"). In its own
// namespace the library binds to its own protobuf and nothing else in the
// process sees it; only C types and malloc'd buffers (freed by
// hilnas_spm_free, in the namespace that allocated them) cross. This file
// includes no Abseil or protobuf header.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace {

char* Copy(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

}  // namespace

extern "C" {

// Returns a handle, or null with *error set (free it with hilnas_spm_free).
void* hilnas_spm_load(const char* bytes, size_t size, char** error) {
  try {
    auto* p = new sentencepiece::SentencePieceProcessor();
    auto s = p->LoadFromSerializedProto(std::string_view(bytes, size));
    if (!s.ok()) {
      *error = Copy(s.ToString());
      delete p;
      return nullptr;
    }
    return p;
  } catch (const std::exception& e) {
    *error = Copy(e.what());
    return nullptr;
  }
}

void hilnas_spm_destroy(void* handle) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(handle);
}

void hilnas_spm_free(void* p) { std::free(p); }

// ids: unk, bos, eos, pad (-1 when the model has none); returns the piece count.
int hilnas_spm_info(void* handle, int* ids) {
  auto* p = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
  ids[0] = p->unk_id();
  ids[1] = p->bos_id();
  ids[2] = p->eos_id();
  ids[3] = p->pad_id();
  return p->GetPieceSize();
}

// On success returns 0 and a malloc'd array of *count ids.
int hilnas_spm_encode(void* handle, const char* text, size_t size, int** ids, size_t* count,
                      char** error) {
  try {
    std::vector<int> out;
    auto s = static_cast<const sentencepiece::SentencePieceProcessor*>(handle)->Encode(
        std::string_view(text, size), &out);
    if (!s.ok()) {
      *error = Copy(s.ToString());
      return 1;
    }
    *count = out.size();
    *ids = static_cast<int*>(std::malloc(sizeof(int) * (out.empty() ? 1 : out.size())));
    if (*ids == nullptr) return 1;
    std::memcpy(*ids, out.data(), sizeof(int) * out.size());
    return 0;
  } catch (const std::exception& e) {
    *error = Copy(e.what());
    return 1;
  }
}

// On success returns 0 and a malloc'd string of *size bytes.
int hilnas_spm_decode(void* handle, const int* ids, size_t count, char** text, size_t* size,
                      char** error) {
  try {
    std::string out;
    auto s = static_cast<const sentencepiece::SentencePieceProcessor*>(handle)->Decode(
        std::vector<int>(ids, ids + count), &out);
    if (!s.ok()) {
      *error = Copy(s.ToString());
      return 1;
    }
    *size = out.size();
    *text = Copy(out);
    return *text == nullptr;
  } catch (const std::exception& e) {
    *error = Copy(e.what());
    return 1;
  }
}

// spm_train's flags; returns 0, or 1 with *error set.
int hilnas_spm_train(const char* args, char** error) {
  try {
    auto s = sentencepiece::SentencePieceTrainer::Train(args);
    if (s.ok()) return 0;
    *error = Copy(s.ToString());
  } catch (const std::exception& e) {
    *error = Copy(e.what());
  }
  return 1;
}

}  // extern "C"
