/* numfmt.c - the public number-format functions of dsk.h. Each one is the
 * inline codec of format.h, so the library, the CPU reference and every
 * backend's host code share one definition (kv-cache.md §2,
 * mxfp4-moe.md §1.1, §1.2, §2.1 step 5).
 *
 * Choices the specs leave open, made here:
 *  - e4m3 NaN inputs of either sign encode to 0x7F (cvt.rn.satfinite does);
 *    decoded NaN codes give a quiet NaN with the code's sign.
 *  - bf16 from a NaN keeps the sign and the upper payload bits and sets the
 *    quiet bit, so a NaN never turns into an infinity.
 *  - e2m1 from NaN gives code 0 (MX blocks with NaN are marked by the block
 *    quantizer with scale byte 0xFF); e2m1 decode reads the low nibble only.
 *  - ue8m0 ceil outside its domain (x finite, > 0): zero and negatives give
 *    1, +inf gives 254, NaN gives 255.
 */
#include "format.h"

dsk_bf16 dsk_bf16_from_f32(float x) { return dsk_fmt_bf16_from_f32(x); }
float dsk_bf16_to_f32(dsk_bf16 x) { return dsk_fmt_bf16_to_f32(x); }

uint8_t dsk_e4m3_from_f32(float x) { return dsk_fmt_e4m3_from_f32(x); }
float dsk_e4m3_to_f32(uint8_t x) { return dsk_fmt_e4m3_to_f32(x); }

uint8_t dsk_e2m1_from_f32(float x) { return dsk_fmt_e2m1_from_f32(x); }
float dsk_e2m1_to_f32(uint8_t code) { return dsk_fmt_e2m1_to_f32(code); }

float dsk_ue8m0_kv_to_f32(uint8_t e) { return dsk_fmt_ue8m0_kv_to_f32(e); }
float dsk_ue8m0_w_to_f32(uint8_t e) { return dsk_fmt_ue8m0_w_to_f32(e); }
uint8_t dsk_ue8m0_ceil_from_f32(float x) { return dsk_fmt_ue8m0_ceil(x); }
