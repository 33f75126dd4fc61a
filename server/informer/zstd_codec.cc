#include "server/informer/zstd_codec.h"

#include <zdict.h>
// ZSTD_createCDict_advanced and ZSTD_getCParams: stable since zstd 1.3 and exported by Debian's
// shared libzstd, but declared only for static linking.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace informerd::informer {
namespace {

// One compression and one decompression context per thread: a context holds hundreds of KiB of
// tables, too much to make per object and not safe to share.
struct Contexts {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  Contexts() {
    // No dictionary id in the frames (the store knows the dictionary); the content size, yes.
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_dictIDFlag, 0);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, kZstdLevel);
    // Reference the digested dictionary's tables instead of copying them into the context for
    // every object: the copy (hundreds of KiB) would cost more than compressing a few KiB.
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_forceAttachDict, ZSTD_dictForceAttach);
  }
  ~Contexts() {
    ZSTD_freeCCtx(cctx);
    ZSTD_freeDCtx(dctx);
  }
};

Contexts& ThreadContexts() {
  thread_local Contexts contexts;
  return contexts;
}

absl::Status ZstdError(absl::string_view what, size_t code) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", ZSTD_getErrorName(code)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ZstdDictionary>> ZstdDictionary::Train(
    absl::Span<const absl::string_view> samples, size_t capacity) {
  std::string concatenated;
  std::vector<size_t> sizes;
  sizes.reserve(samples.size());
  for (absl::string_view s : samples) {
    concatenated.append(s.data(), s.size());
    sizes.push_back(s.size());
  }
  std::string bytes(capacity, '\0');
  const size_t n = ZDICT_trainFromBuffer(bytes.data(), bytes.size(), concatenated.data(),
                                         sizes.data(), static_cast<unsigned>(sizes.size()));
  if (ZDICT_isError(n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("zstd dictionary training on ", samples.size(),
                     " samples: ", ZDICT_getErrorName(n)));
  }
  bytes.resize(n);
  return FromBytes(std::move(bytes));
}

absl::StatusOr<std::shared_ptr<const ZstdDictionary>> ZstdDictionary::FromBytes(
    std::string bytes) {
  std::shared_ptr<ZstdDictionary> dict(new ZstdDictionary());
  dict->bytes_ = std::move(bytes);
  // The digested forms copy what they need, so bytes_ may move with the dictionary.
  // Tables sized for objects of a few KiB: zstd's default for an unknown source size is a
  // megabyte of hash tables in the digested dictionary, more than a small informer's objects.
  dict->cdict_ = ZSTD_createCDict_advanced(
      dict->bytes_.data(), dict->bytes_.size(), ZSTD_dlm_byCopy, ZSTD_dct_auto,
      ZSTD_getCParams(kZstdLevel, kTypicalObjectSize, dict->bytes_.size()), ZSTD_defaultCMem);
  dict->ddict_ = ZSTD_createDDict(dict->bytes_.data(), dict->bytes_.size());
  if (dict->cdict_ == nullptr || dict->ddict_ == nullptr) {
    return absl::InvalidArgumentError("zstd rejected the dictionary");
  }
  dict->memory_bytes_ =
      dict->bytes_.capacity() + ZSTD_sizeof_CDict(dict->cdict_) + ZSTD_sizeof_DDict(dict->ddict_);
  return dict;
}

ZstdDictionary::~ZstdDictionary() {
  ZSTD_freeCDict(cdict_);
  ZSTD_freeDDict(ddict_);
}

std::string ZstdCompress(absl::string_view data, const ZstdDictionary* dictionary) {
  Contexts& c = ThreadContexts();
  ZSTD_CCtx_refCDict(c.cctx, dictionary == nullptr ? nullptr : dictionary->cdict_);
  std::string frame(ZSTD_compressBound(data.size()), '\0');
  const size_t n = ZSTD_compress2(c.cctx, frame.data(), frame.size(), data.data(), data.size());
  // With a buffer of ZSTD_compressBound bytes, compression cannot fail.
  if (ZSTD_isError(n)) {
    ZSTD_CCtx_reset(c.cctx, ZSTD_reset_session_only);
    frame.clear();
    return frame;
  }
  frame.resize(n);
  frame.shrink_to_fit();
  return frame;
}

absl::StatusOr<std::string> ZstdDecompress(absl::string_view frame,
                                           const ZstdDictionary* dictionary) {
  const unsigned long long size = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (size == ZSTD_CONTENTSIZE_ERROR) return absl::InvalidArgumentError("not a zstd frame");
  if (size == ZSTD_CONTENTSIZE_UNKNOWN || size > kMaxContentSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("zstd frame of unknown or implausible content size (", size, ")"));
  }
  Contexts& c = ThreadContexts();
  std::string out(size, '\0');
  const size_t n =
      dictionary == nullptr
          ? ZSTD_decompressDCtx(c.dctx, out.data(), out.size(), frame.data(), frame.size())
          : ZSTD_decompress_usingDDict(c.dctx, out.data(), out.size(), frame.data(),
                                       frame.size(), dictionary->ddict_);
  if (ZSTD_isError(n)) return ZstdError("zstd decompression", n);
  if (n != size) {
    return absl::InvalidArgumentError(
        absl::StrCat("zstd frame declares ", size, " bytes but holds ", n));
  }
  return out;
}

}  // namespace informerd::informer
