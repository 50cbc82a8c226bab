// heed/config.h — compile-time limits shared by every layer (free of other includes so the
// CUDA sources can use it).
#pragma once

namespace heed {

inline constexpr int kMaxDims = 8;  // the most dimensions a tensor may have

}  // namespace heed
