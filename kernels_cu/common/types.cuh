// Fixed-width integer names. NVRTC has no <cstdint> without the toolkit headers, so spell them.
#pragma once
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;
#define DS_FULL_MASK 0xffffffffu
