// heed/heed.h — the umbrella header: everything a training program needs. It lives in the top
// layer (layers/include) so that it can include every layer without an upward include.
#pragma once

#include "heed/attention.h"     // IWYU pragma: export
#include "heed/autocast.h"      // IWYU pragma: export
#include "heed/autograd.h"      // IWYU pragma: export
#include "heed/blas_info.h"     // IWYU pragma: export
#include "heed/checkpoint.h"    // IWYU pragma: export
#include "heed/cli.h"           // IWYU pragma: export
#include "heed/clip.h"          // IWYU pragma: export
#include "heed/cuda.h"          // IWYU pragma: export
#include "heed/ddp.h"           // IWYU pragma: export
#include "heed/device.h"        // IWYU pragma: export
#include "heed/diagnostics.h"   // IWYU pragma: export
#include "heed/dist.h"          // IWYU pragma: export
#include "heed/dtype.h"         // IWYU pragma: export
#include "heed/error.h"         // IWYU pragma: export
#include "heed/functional.h"    // IWYU pragma: export
#include "heed/grad_scaler.h"   // IWYU pragma: export
#include "heed/gradcheck.h"     // IWYU pragma: export
#include "heed/io.h"            // IWYU pragma: export
#include "heed/json_read.h"     // IWYU pragma: export
#include "heed/lr_scheduler.h"  // IWYU pragma: export
#include "heed/memory.h"        // IWYU pragma: export
#include "heed/metrics.h"       // IWYU pragma: export
#include "heed/nn/nn.h"         // IWYU pragma: export
#include "heed/ops.h"           // IWYU pragma: export
#include "heed/optim.h"         // IWYU pragma: export
#include "heed/parallel.h"      // IWYU pragma: export
#include "heed/profile.h"       // IWYU pragma: export
#include "heed/random.h"        // IWYU pragma: export
#include "heed/report.h"        // IWYU pragma: export
#include "heed/shape.h"         // IWYU pragma: export
#include "heed/tensor.h"        // IWYU pragma: export
#include "heed/version.h"       // IWYU pragma: export
#include "heed/zero.h"          // IWYU pragma: export
