/* Inverted dropout with masks drawn from a counter-based generator
 * (Philox4x32-10): the keep/drop decision of an element is a pure function
 * of (seed, step, layer, global element index). Masks are therefore
 * reproducible, need no storage between forward and backward, and do not
 * depend on how the global batch is split across replicas or calls: a
 * replica holding samples [s0, s1) of the global batch, each of `per`
 * elements, passes first = s0 * per and gets the same mask the whole batch
 * would have had over those elements. */
#ifndef OP_DROPOUT_H
#define OP_DROPOUT_H

#include <stddef.h>
#include <stdint.h>

/* Identifies one dropout layer at one training step. */
typedef struct op_dropout_key {
    uint64_t seed;   /* run seed */
    int64_t step;    /* training step: a new mask every step */
    int32_t layer;   /* layer index: independent masks per layer */
} op_dropout_key;

/* Philox4x32-10 of a 128-bit counter under a 64-bit key, as in Random123
 * (Salmon et al., SC'11). Exposed for tests. */
void op_philox4x32(uint32_t out[4], const uint32_t ctr[4],
                   const uint32_t key[2]);

/* mask is (count): 1 where element first + i is kept with drop
 * probability p, else 0. The element's 32-bit draw is lane (e % 4) of
 * Philox(ctr = (e / 4 as 64 bits, step as 64 bits),
 *        key = splitmix64(seed ^ splitmix64(layer))), kept iff the draw is
 * >= p * 2^32. */
void op_dropout_mask(uint8_t *mask, size_t count, uint64_t first, float p,
                     const op_dropout_key *key);

/* in and out are (count), out may alias in: out = in * mask / (1 - p).
 * p <= 0 copies, p >= 1 zeroes. */
void op_dropout_forward(float *out, const float *in, size_t count,
                        uint64_t first, float p, const op_dropout_key *key);

/* dout and din are (count), din may alias dout: din = dout * mask / (1-p),
 * the mask recomputed from the same key and first. */
void op_dropout_backward(float *din, const float *dout, size_t count,
                         uint64_t first, float p, const op_dropout_key *key);

#endif
