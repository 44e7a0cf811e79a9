// defines: the precompiled header: LibTorch and c10d, parsed once per build instead of per file.
#pragma once
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/group/compat.h"
