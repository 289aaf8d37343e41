/* Fully connected layer: out = in * weight^T + bias, row-major, fp32. */
#ifndef OP_DENSE_H
#define OP_DENSE_H

#include <stddef.h>
#include <stdint.h>

/* in is (n, in_f), weight is (out_f, in_f), bias is (out_f) or NULL,
 * out is (n, out_f). out must not alias the inputs. */
void op_dense_forward(float *out, const float *in, const float *weight,
                      const float *bias, int n, int in_f, int out_f);

/* dout is (n, out_f), in is (n, in_f), weight is (out_f, in_f).
 * Writes (overwrites) dweight (out_f, in_f), dbias (out_f, may be NULL) and
 * din (n, in_f, may be NULL). No output may alias an input. */
void op_dense_backward(float *din, float *dweight, float *dbias,
                       const float *dout, const float *in,
                       const float *weight, int n, int in_f, int out_f);

/* The same in mixed precision: each GEMM's operands rounded to bfloat16,
 * their products summed in float32 (kern_gemm_bf16; float32 where the
 * processor has no bfloat16 path). ws: convplan_dense_bf16_workspace(n,
 * in_f, out_f) bytes, 64-byte aligned. The bias and its gradient stay in
 * float32. w16: NULL, or the weights rounded (bf16_pack, out_f rows of
 * in_f) by the caller, who keeps them so: the GEMMs then use them as they
 * are (kern_gemm_bf16_kept_b), the same bits. w_stale: weight holds
 * nothing yet, w16 alone the weights (Weight Streaming lands them so); a
 * GEMM that falls back to float32 widens w16 into weight first. */
void op_dense_forward_bf16(float *out, const float *in, const float *weight, const uint16_t *w16,
                           int w_stale, const float *bias, int n, int in_f, int out_f, void *ws,
                           size_t ws_bytes);
void op_dense_backward_bf16(float *din, float *dweight, float *dbias, const float *dout,
                            const float *in, const float *weight, const uint16_t *w16,
                            int w_stale, int n, int in_f, int out_f, void *ws, size_t ws_bytes);

/* op_relu_backward(dout, dout, y, n * out_f) of the relu fused after the
 * layer (y its output), then op_dense_backward_bf16 on that dout: the same
 * bits, in one pass over dout that also sums its columns and rounds it for
 * both GEMMs, where the processor has AVX512_BF16 and ws has
 * convplan_dense_bf16_dy_workspace bytes. dout is masked in place. */
void op_dense_relu_backward_bf16(float *din, float *dweight, float *dbias, float *dout,
                                 const float *y, const float *in, const float *weight,
                                 const uint16_t *w16, int w_stale, int n, int in_f, int out_f,
                                 void *ws, size_t ws_bytes);

/* Plain loops with the same contracts, kept as the reference that tests hold
 * the GEMM path to. */
void op_dense_forward_ref(float *out, const float *in, const float *weight,
                          const float *bias, int n, int in_f, int out_f);
void op_dense_backward_ref(float *din, float *dweight, float *dbias,
                           const float *dout, const float *in,
                           const float *weight, int n, int in_f, int out_f);

#endif
