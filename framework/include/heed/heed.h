// heed/heed.h — the umbrella header: everything a training program needs.
#pragma once

#include "heed/autograd.h"    // IWYU pragma: export
#include "heed/cuda.h"        // IWYU pragma: export
#include "heed/device.h"      // IWYU pragma: export
#include "heed/dtype.h"       // IWYU pragma: export
#include "heed/error.h"       // IWYU pragma: export
#include "heed/functional.h"  // IWYU pragma: export
#include "heed/gradcheck.h"   // IWYU pragma: export
#include "heed/ops.h"         // IWYU pragma: export
#include "heed/parallel.h"    // IWYU pragma: export
#include "heed/random.h"      // IWYU pragma: export
#include "heed/shape.h"       // IWYU pragma: export
#include "heed/tensor.h"      // IWYU pragma: export
#include "heed/version.h"     // IWYU pragma: export
