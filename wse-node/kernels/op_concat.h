/* Concatenation of NCHW tensors along channels (U-Net skip connections). */
#ifndef OP_CONCAT_H
#define OP_CONCAT_H

/* ins[j] is (n, channels[j], hw) for j < count; out is
 * (n, sum of channels, hw), input j's channels following input j-1's. */
void op_concat_forward(float *out, const float *const *ins,
                       const int *channels, int count, int n, int hw);

/* dout is (n, sum of channels, hw). Overwrites every non-NULL dins[j]
 * (n, channels[j], hw) with its slice of dout. */
void op_concat_backward(float *const *dins, const float *dout,
                        const int *channels, int count, int n, int hw);

#endif
