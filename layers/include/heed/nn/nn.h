// heed/nn/nn.h — every layer and module (included by <heed/heed.h>).
#pragma once

#include "heed/nn/attention.h"    // IWYU pragma: export
#include "heed/nn/init.h"         // IWYU pragma: export
#include "heed/nn/layers.h"       // IWYU pragma: export
#include "heed/nn/module.h"       // IWYU pragma: export
#include "heed/nn/recompute.h"    // IWYU pragma: export
#include "heed/nn/transformer.h"  // IWYU pragma: export
