// Shim: the CUDA runtime API of the CPU emulator (see ../emu.h).
#pragma once
#include "../emu.h"
