/* STUB: to be replaced (number formats). */
#include "dsk.h"
dsk_bf16 dsk_bf16_from_f32(float x) { (void)x; return 0; }
float dsk_bf16_to_f32(dsk_bf16 x) { (void)x; return 0; }
uint8_t dsk_e4m3_from_f32(float x) { (void)x; return 0; }
float dsk_e4m3_to_f32(uint8_t x) { (void)x; return 0; }
uint8_t dsk_e2m1_from_f32(float x) { (void)x; return 0; }
float dsk_e2m1_to_f32(uint8_t c) { (void)c; return 0; }
float dsk_ue8m0_kv_to_f32(uint8_t e) { (void)e; return 0; }
float dsk_ue8m0_w_to_f32(uint8_t e) { (void)e; return 0; }
uint8_t dsk_ue8m0_ceil_from_f32(float x) { (void)x; return 0; }
