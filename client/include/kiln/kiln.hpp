// The C++ API of libkiln_client in one include: ops on tensors, raw kernels, client settings.
#pragma once

#include "kiln/client.h"
#include "kiln/kernel.h"
#include "kiln/ops.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"
#include "kiln/tune.h"
#include "kiln/version.h"
