// heed/amp.h — automatic mixed precision in one include: heed/autocast.h (the Autocast scope
// and the cast rules the ops follow, PyTorch's torch.autocast) and heed/grad_scaler.h
// (dynamic loss scaling, PyTorch's torch.amp.GradScaler). See those headers for the usage
// and the invariants; this one declares nothing itself.
#pragma once

#include "heed/autocast.h"     // IWYU pragma: export
#include "heed/grad_scaler.h"  // IWYU pragma: export
