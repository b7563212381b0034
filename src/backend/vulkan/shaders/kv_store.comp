// Rows of F32 values into a cache's slots (row slot % rows), converted to its type as tandem's quantize_row_ref
// does: F16 and BF16 rounded to nearest even (integer arithmetic, not the driver's conversion), Q8_0 d = amax / 127
// and q = round-to-even(x / d), Q4_0 d = (the value of largest magnitude) / -8 and q = min(15, int(x / d + 8.5)).
// One invocation per element (F32, F16, BF16) or per 32-element block; bytes are written with atomics on their
// own bits (neighbouring elements share 32-bit words), so any offset works.
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer C { uint c[]; };
layout(std430, binding = 2) readonly buffer Slots { int slots[]; };
layout(push_constant) uniform P {
    uint x_off, x_stride;  // floats
    uint c_off, c_stride, c_rows, type;  // bytes
    uint cols, rows;
} p;

void put_byte(uint o, uint v) {
    const uint sh = (o & 3u) * 8u;
    atomicAnd(c[o >> 2], ~(0xFFu << sh));
    atomicOr(c[o >> 2], (v & 0xFFu) << sh);
}
void put_u16(uint o, uint v) {
    put_byte(o, v);
    put_byte(o + 1u, v >> 8u);
}
uint f16_bits(float f) {  // round to nearest even, as f32_to_fp16
    const uint u = floatBitsToUint(f), sign = (u >> 16u) & 0x8000u;
    const uint a = u & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) return sign | (a > 0x7F800000u ? 0x7E00u : 0x7C00u);  // NaN, inf
    if (a >= 0x477FF000u) return sign | 0x7C00u;  // rounds past the largest half: inf
    if (a < 0x38800000u) {  // a half subnormal (or zero)
        if (a < 0x33000000u) return sign;  // below half the smallest subnormal
        const uint e = a >> 23u, m = (a & 0x7FFFFFu) | 0x800000u;
        const uint shift = 126u - e;  // m >> (shift) is the subnormal mantissa
        const uint q = m >> shift, rem = m & ((1u << shift) - 1u), hlf = 1u << (shift - 1u);
        return sign | (q + uint(rem > hlf || (rem == hlf && (q & 1u) == 1u)));
    }
    const uint r = a - 0x38000000u;  // rebias the exponent (127 -> 15)
    const uint q = r >> 13u, rem = r & 0x1FFFu;
    return sign | (q + uint(rem > 0x1000u || (rem == 0x1000u && (q & 1u) == 1u)));
}
uint bf16_bits(float f) {
    const uint u = floatBitsToUint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16u) | 0x40u;  // NaN stays NaN
    return (u + 0x7FFFu + ((u >> 16u) & 1u)) >> 16u;
}

void main() {
    const uint unit = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
    const uint per = p.type <= 2u ? 1u : 32u;
    if (unit * per >= p.cols || t >= p.rows) return;
    const uint xr = p.x_off + t * p.x_stride;
    const uint row = p.c_off + (uint(slots[t]) % p.c_rows) * p.c_stride;
    if (p.type == 0u) {
        const uint o = row + 4u * unit, v = floatBitsToUint(x[xr + unit]);
        if ((o & 3u) == 0u) c[o >> 2] = v;
        else {
            put_u16(o, v);
            put_u16(o + 2u, v >> 16u);
        }
        return;
    }
    if (p.type == 1u || p.type == 2u) {
        const float v = x[xr + unit];
        put_u16(row + 2u * unit, p.type == 1u ? f16_bits(v) : bf16_bits(v));
        return;
    }
    const uint e0 = unit * 32u;
    if (p.type == 3u) {
        float amax = 0.0;
        for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(x[xr + e0 + j]));
        const float d = amax / 127.0, id = d != 0.0 ? 1.0 / d : 0.0;
        const uint o = row + unit * 34u;
        put_u16(o, f16_bits(d));
        for (uint j = 0u; j < 32u; j++) {
            precise float v = x[xr + e0 + j] * id;
            put_byte(o + 2u + j, uint(int(roundEven(v))));
        }
        return;
    }
    float amax = 0.0, maxv = 0.0;
    for (uint j = 0u; j < 32u; j++) {
        const float v = x[xr + e0 + j];
        if (abs(v) > amax) {
            amax = abs(v);
            maxv = v;
        }
    }
    const float d = maxv / -8.0, id = d != 0.0 ? 1.0 / d : 0.0;
    const uint o = row + unit * 18u;
    put_u16(o, f16_bits(d));
    for (uint j = 0u; j < 16u; j++) {
        precise float va = x[xr + e0 + j] * id + 8.5;  // (no FMA: the CPU rounds the product first)
        precise float vb = x[xr + e0 + j + 16u] * id + 8.5;
        const uint a = uint(min(15, int(va)));
        const uint b = uint(min(15, int(vb)));
        put_byte(o + 2u + j, a | (b << 4u));
    }
}
