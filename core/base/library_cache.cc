#include "core/base/library_cache.h"

#include <algorithm>
#include <iterator>
#include <variant>

namespace tensord::core {

LibraryKey LibraryKeyOf(const KernelArgs& args, DType dtype, int64_t extra) {
  LibraryKey key{};
  key[0] = static_cast<int64_t>(args.index());
  key[3] = static_cast<int64_t>(dtype);
  key[20] = extra;
  const WindowDims* w = nullptr;
  if (const auto* conv = std::get_if<Conv2dArgs>(&args)) {
    key[1] = static_cast<int64_t>(conv->pass);
    key[2] = conv->bias ? 1 : 0;
    key[18] = conv->groups;
    key[19] = conv->out_channels;
    w = &conv->dims;
  } else if (const auto* pool = std::get_if<Pool2dArgs>(&args)) {
    key[1] = static_cast<int64_t>(pool->pass);
    key[2] = static_cast<int64_t>(pool->algorithm);
    w = &pool->dims;
  }
  if (w != nullptr) {
    const int64_t dims[] = {w->n,  w->c,  w->h,  w->w,  w->kh, w->kw, w->sh,
                            w->sw, w->ph, w->pw, w->dh, w->dw, w->oh, w->ow};
    std::copy(std::begin(dims), std::end(dims), key.begin() + 4);
  }
  return key;
}

size_t LibraryKeyHash::operator()(const LibraryKey& key) const {
  size_t h = 0;
  for (int64_t d : key) h = h * 1000003 ^ static_cast<size_t>(d);
  return h;
}

}  // namespace tensord::core
