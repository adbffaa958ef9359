#include "tokenizer/sentencepiece_model.h"

#include <dlfcn.h>  // dlmopen (glibc; _GNU_SOURCE is on in g++)
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include <google/protobuf/unknown_field_set.h>

namespace hilnas::tokenizer::internal {
namespace {

using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// sentencepiece_model.proto, as the installed library writes it:
//   ModelProto      { pieces = 1; trainer_spec = 2; normalizer_spec = 3; }
//   SentencePiece   { piece = 1 (string); score = 2 (float); type = 3 (enum, default NORMAL) }
//   TrainerSpec     { model_type = 3 (enum, default UNIGRAM) }
//   NormalizerSpec  { name = 1; precompiled_charsmap = 2; add_dummy_prefix = 3 [true];
//                     remove_extra_whitespaces = 4 [true] }
// Read through protobuf's UnknownFieldSet: the -dev package ships no
// generated header for these messages.
constexpr int kModelPieces = 1, kModelTrainerSpec = 2, kModelNormalizerSpec = 3;
constexpr int kPiecePiece = 1, kPieceScore = 2, kPieceType = 3;
constexpr int kTrainerModelType = 3;
constexpr int kNormName = 1, kNormCharsmap = 2, kNormDummyPrefix = 3, kNormExtraWhitespace = 4;
constexpr int32_t kTypeNormal = 1, kTypeByte = 6;

// The shim's C interface (spm_shim.cc).
struct Shim {
  void* (*load)(const char*, size_t, char**);
  void (*destroy)(void*);
  void (*free)(void*);
  int (*info)(void*, int*);
  int (*encode)(void*, const char*, size_t, int**, size_t*, char**);
  int (*decode)(void*, const int*, size_t, char**, size_t*, char**);
  int (*train)(const char*, char**);
  std::string error;  // why it could not be loaded
};

// Where libhilnas_spm.so is looked for: $HILNAS_SPM_SHIM, beside the running
// executable, then the build tree it was built in.
std::vector<std::string> ShimCandidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("HILNAS_SPM_SHIM"); env != nullptr && *env != '\0') {
    out.push_back(env);
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string dir(exe, n);
    dir.resize(dir.rfind('/') + 1);
    out.push_back(dir + "libhilnas_spm.so");
  }
#ifdef HILNAS_SPM_SHIM_PATH
  out.push_back(HILNAS_SPM_SHIM_PATH);
#endif
  return out;
}

const Shim& GetShim() {
  static const Shim* shim = [] {
    auto* s = new Shim{};
    std::string tried;
    void* lib = nullptr;
    for (const std::string& path : ShimCandidates()) {
      if (access(path.c_str(), R_OK) != 0) {
        tried += (tried.empty() ? "" : ", ") + path;
        continue;
      }
      // A link namespace of its own: the library and its dependencies
      // resolve to their own symbols (its protobuf-lite), never the
      // process's (gRPC's protobuf). RTLD_DEEPBIND is not enough: it also
      // rebinds libstdc++'s std::cerr away from the executable's copy, and
      // the trainer's first log line crashes.
      lib = dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib == nullptr) {
        s->error = std::string("cannot load ") + path + ": " + dlerror();
        return s;
      }
      break;
    }
    if (lib == nullptr) {
      s->error = "SentencePiece support (libhilnas_spm.so) was not found; looked for " + tried;
      return s;
    }
    auto sym = [&](const char* name) {
      void* f = dlsym(lib, name);
      if (f == nullptr) s->error = std::string("libhilnas_spm.so lacks ") + name;
      return f;
    };
    s->load = reinterpret_cast<decltype(s->load)>(sym("hilnas_spm_load"));
    s->destroy = reinterpret_cast<decltype(s->destroy)>(sym("hilnas_spm_destroy"));
    s->free = reinterpret_cast<decltype(s->free)>(sym("hilnas_spm_free"));
    s->info = reinterpret_cast<decltype(s->info)>(sym("hilnas_spm_info"));
    s->encode = reinterpret_cast<decltype(s->encode)>(sym("hilnas_spm_encode"));
    s->decode = reinterpret_cast<decltype(s->decode)>(sym("hilnas_spm_decode"));
    s->train = reinterpret_cast<decltype(s->train)>(sym("hilnas_spm_train"));
    return s;
  }();
  return *shim;
}

// Takes a malloc'd error string from the shim.
std::string TakeError(const Shim& shim, char* error) {
  std::string out = error != nullptr ? error : "unknown SentencePiece error";
  if (error != nullptr) shim.free(error);
  return out;
}

float Fixed32ToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace

SentencePieceModel::SentencePieceModel() = default;
SentencePieceModel::~SentencePieceModel() {
  if (handle_ != nullptr) GetShim().destroy(handle_);
}

std::string TrainSentencePiece(const std::string& args) {
  const Shim& shim = GetShim();
  if (!shim.error.empty()) return shim.error;
  char* error = nullptr;
  if (shim.train(args.c_str(), &error) != 0) return TakeError(shim, error);
  return "";
}

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& bytes,
                                                             std::string* error) {
  const Shim& shim = GetShim();
  if (!shim.error.empty()) {
    *error = shim.error;
    return nullptr;
  }
  std::unique_ptr<SentencePieceModel> m(new SentencePieceModel());
  char* load_error = nullptr;
  m->handle_ = shim.load(bytes.data(), bytes.size(), &load_error);
  if (m->handle_ == nullptr) {
    *error = "not a SentencePiece model: " + TakeError(shim, load_error);
    return nullptr;
  }
  UnknownFieldSet root;
  if (!root.ParseFromString(bytes)) {
    *error = "not a valid ModelProto";
    return nullptr;
  }
  for (int i = 0; i < root.field_count(); ++i) {
    const UnknownField& f = root.field(i);
    if (f.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    UnknownFieldSet sub;
    if (!sub.ParseFromString(f.length_delimited())) {
      *error = "ModelProto field " + std::to_string(f.number()) + " does not parse";
      return nullptr;
    }
    if (f.number() == kModelPieces) {
      std::string piece;
      float score = 0.f;
      int32_t type = kTypeNormal;
      for (int k = 0; k < sub.field_count(); ++k) {
        const UnknownField& g = sub.field(k);
        if (g.number() == kPiecePiece && g.type() == UnknownField::TYPE_LENGTH_DELIMITED) {
          piece = g.length_delimited();
        } else if (g.number() == kPieceScore && g.type() == UnknownField::TYPE_FIXED32) {
          score = Fixed32ToFloat(g.fixed32());
        } else if (g.number() == kPieceType && g.type() == UnknownField::TYPE_VARINT) {
          type = static_cast<int32_t>(g.varint());
        }
      }
      m->byte_fallback |= type == kTypeByte;
      m->pieces.push_back(std::move(piece));
      m->scores.push_back(score);
      m->types.push_back(type);
    } else if (f.number() == kModelTrainerSpec) {
      for (int k = 0; k < sub.field_count(); ++k) {
        const UnknownField& g = sub.field(k);
        if (g.number() == kTrainerModelType && g.type() == UnknownField::TYPE_VARINT) {
          m->model_type = static_cast<ModelType>(g.varint());
        }
      }
    } else if (f.number() == kModelNormalizerSpec) {
      for (int k = 0; k < sub.field_count(); ++k) {
        const UnknownField& g = sub.field(k);
        if (g.number() == kNormName && g.type() == UnknownField::TYPE_LENGTH_DELIMITED) {
          m->normalizer_name = g.length_delimited();
        } else if (g.number() == kNormCharsmap && g.type() == UnknownField::TYPE_LENGTH_DELIMITED) {
          m->has_charsmap = !g.length_delimited().empty();
        } else if (g.number() == kNormDummyPrefix && g.type() == UnknownField::TYPE_VARINT) {
          m->add_dummy_prefix = g.varint() != 0;
        } else if (g.number() == kNormExtraWhitespace && g.type() == UnknownField::TYPE_VARINT) {
          m->remove_extra_whitespaces = g.varint() != 0;
        }
      }
    }
  }
  int ids[4];
  const int size = shim.info(m->handle_, ids);
  if (static_cast<int>(m->pieces.size()) != size) {
    *error = "the ModelProto lists " + std::to_string(m->pieces.size()) +
             " pieces but the library loaded " + std::to_string(size);
    return nullptr;
  }
  m->unk_id = ids[0];
  m->bos_id = ids[1];
  m->eos_id = ids[2];
  m->pad_id = ids[3];
  return m;
}

bool SentencePieceModel::Encode(std::string_view text, std::vector<int32_t>* ids,
                                std::string* error) const {
  const Shim& shim = GetShim();
  int* out = nullptr;
  size_t count = 0;
  char* err = nullptr;
  if (shim.encode(handle_, text.data(), text.size(), &out, &count, &err) != 0) {
    *error = TakeError(shim, err);
    return false;
  }
  ids->insert(ids->end(), out, out + count);
  shim.free(out);
  return true;
}

bool SentencePieceModel::Decode(const std::vector<int32_t>& ids, std::string* text,
                                std::string* error) const {
  static_assert(sizeof(int) == sizeof(int32_t));
  const Shim& shim = GetShim();
  char* out = nullptr;
  size_t size = 0;
  char* err = nullptr;
  if (shim.decode(handle_, reinterpret_cast<const int*>(ids.data()), ids.size(), &out, &size,
                  &err) != 0) {
    *error = TakeError(shim, err);
    return false;
  }
  text->assign(out, size);
  shim.free(out);
  return true;
}

}  // namespace hilnas::tokenizer::internal
