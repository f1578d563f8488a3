// Precompiled header for every translation unit that uses LibTorch. Only headers that are
// expensive and used nearly everywhere belong here.
#pragma once
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>
