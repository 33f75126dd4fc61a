// ZstdCodec: the compression of stored objects (StoreOptions::compression) — zstd frames, with a
// dictionary trained on the informer's own objects once there are enough of them.
//
//   std::shared_ptr<const ZstdDictionary> dict = ZstdDictionary::Train(samples).value();
//   std::string frame = ZstdCompress(object->json(), dict.get());
//   absl::StatusOr<std::string> json = ZstdDecompress(frame, dict.get());
//
// Why a dictionary: one object is a few KiB, too little for zstd to find the repetition that
// makes Kubernetes JSON compressible (the same keys, the same image names, the same label sets in
// every object of a kind). A dictionary trained on the informer's objects holds that repetition
// once; each object's frame then only encodes what differs, 5–10x smaller instead of 2–3x.
//
// A frame records its content size (so the reader allocates once) but not the dictionary's id:
// the store always decompresses with the dictionary it compressed with (it keeps a reference
// beside the frame), and four bytes per object are worth saving.
//
// Decompression of a frame that is not what ZstdCompress made with that dictionary (corrupted,
// truncated, another dictionary) is an error, never a crash or a read out of bounds: zstd checks
// its input, and the content size is bounded (kMaxContentSize) before anything is allocated.
//
// Thread safety: a ZstdDictionary is immutable and may be used by any number of threads at once.
// The functions keep one zstd context per thread.
#ifndef INFORMERD_SERVER_INFORMER_ZSTD_CODEC_H_
#define INFORMERD_SERVER_INFORMER_ZSTD_CODEC_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

struct ZSTD_CDict_s;
struct ZSTD_DDict_s;

namespace informerd::informer {

// zstd's level 3 (its default): at a few KiB per object the higher levels gain a few percent for
// several times the write cost.
inline constexpr int kZstdLevel = 3;
// The largest content a frame may declare: an Object's JSON is below 4 GiB, and Kubernetes
// objects are below etcd's 1.5 MiB; anything larger is a corrupted frame.
inline constexpr size_t kMaxContentSize = size_t{64} << 20;
// What the compression tables are sized for (zstd's estimatedSrcSize).
inline constexpr size_t kTypicalObjectSize = 16 << 10;

class ZstdDictionary {
 public:
  // 32 KiB: enough for the field names and common values of one kind; larger dictionaries gain
  // little on objects of a few KiB and cost their size in every thread's zstd context.
  static constexpr size_t kDefaultCapacity = 32 << 10;

  // Trains a dictionary on `samples` (ZDICT_trainFromBuffer). Fails (InvalidArgument) when zstd
  // cannot train one: too few or too small samples (it wants at least a few dozen).
  static absl::StatusOr<std::shared_ptr<const ZstdDictionary>> Train(
      absl::Span<const absl::string_view> samples, size_t capacity = kDefaultCapacity);
  // A dictionary from trained bytes (as bytes() returns). InvalidArgument if zstd rejects them.
  static absl::StatusOr<std::shared_ptr<const ZstdDictionary>> FromBytes(std::string bytes);

  ~ZstdDictionary();
  ZstdDictionary(const ZstdDictionary&) = delete;
  ZstdDictionary& operator=(const ZstdDictionary&) = delete;

  const std::string& bytes() const { return bytes_; }
  // Heap bytes of the dictionary and its digested compression and decompression forms.
  size_t memory_bytes() const { return memory_bytes_; }

 private:
  friend std::string ZstdCompress(absl::string_view, const ZstdDictionary*);
  friend absl::StatusOr<std::string> ZstdDecompress(absl::string_view, const ZstdDictionary*);
  ZstdDictionary() = default;

  std::string bytes_;
  ZSTD_CDict_s* cdict_ = nullptr;
  ZSTD_DDict_s* ddict_ = nullptr;
  size_t memory_bytes_ = 0;
};

// One zstd frame holding `data`, with `dictionary` (nullptr: none), at kZstdLevel.
std::string ZstdCompress(absl::string_view data, const ZstdDictionary* dictionary);

// The content of `frame`, which ZstdCompress made with `dictionary`. InvalidArgument (with zstd's
// reason) for anything else.
absl::StatusOr<std::string> ZstdDecompress(absl::string_view frame,
                                           const ZstdDictionary* dictionary);

}  // namespace informerd::informer

#endif  // INFORMERD_SERVER_INFORMER_ZSTD_CODEC_H_
