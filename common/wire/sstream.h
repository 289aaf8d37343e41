/* Packed weight chunks of sparse tensors (stream.proto's Packing): a
 * chunk of count elements (elem bytes each, float32 or bfloat16 as the
 * dense stream sends them) travels as its kept elements and an index, a
 * bitmask or the kept positions (uint16 or uint32), whichever is smallest;
 * dense when packing saves nothing. Pure functions over buffers, so that
 * the sender (memoryx), the checks (msgcheck) and the receiver (the
 * wse-node) share one definition, and tests and fuzzing reach it alone. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The values of stream.proto's Packing. */
enum {
    SSTREAM_DENSE = 0,
    SSTREAM_BITMASK = 1,
    SSTREAM_POS16 = 2,
    SSTREAM_POS32 = 3,
};

/* The longest chunk PACK_POS16 indexes (positions 0 to 65535). */
#define SSTREAM_POS16_MAX 65536ull

/* Bytes of the index that leads a chunk of count elements, kept of them,
 * packed as pk (0 dense): the bitmask's bytes, or the positions', padded
 * with zeros to a multiple of 4 so that the values after them are aligned
 * as the payload is; UINT64_MAX as sstream_bytes. */
uint64_t sstream_index_bytes(uint32_t pk, uint64_t count, uint64_t kept);

/* Payload bytes of a chunk of count elements of elem bytes, kept of them,
 * packed as pk; UINT64_MAX when pk cannot hold it (an unknown packing,
 * kept > count, POS16 past SSTREAM_POS16_MAX elements). count is at most
 * 2^40 (MSGCHECK_MAX_TENSOR_ELEMS): no sum wraps. */
uint64_t sstream_bytes(uint32_t pk, uint64_t count, uint64_t kept, uint32_t elem);

/* The packing of the smallest payload for the chunk whose kept elements
 * are those with mask[i] != 0 (i < count); *kept is their number. Dense
 * when nothing is smaller (ties go to dense); never an empty payload (no
 * element kept: the bitmask). */
uint32_t sstream_choose(const uint8_t *mask, uint64_t count, uint32_t elem, uint64_t *kept);

/* Writes the chunk, its dense elements at src, packed as pk (with kept
 * from sstream_choose) into out, which has room for sstream_bytes(pk,
 * count, kept, elem) bytes. */
void sstream_pack(uint32_t pk, const uint8_t *mask, const void *src, uint64_t count, uint64_t kept,
                  uint32_t elem, void *out);

/* sstream_choose and sstream_pack with the kept elements given as bits
 * at..at+count-1 of a bit array (bit j%8 of byte j/8: 1 kept), as
 * sstream_mark records them; the same packing and bytes as a byte mask
 * of those bits gives. */
uint32_t sstream_choose_bits(const uint8_t *bits, uint64_t at, uint64_t count, uint32_t elem,
                             uint64_t *kept);
void sstream_pack_bits(uint32_t pk, const uint8_t *bits, uint64_t at, const void *src,
                       uint64_t count, uint64_t kept, uint32_t elem, void *out);

/* The bits set among at..at+count-1 of a bit array. */
uint64_t sstream_count_bits(const uint8_t *bits, uint64_t at, uint64_t count);

/* sstream_pack_bits from the kept elements alone: vals holds the kept
 * ones of bits at..at+count-1 in order (what a sender that stores them
 * compacted has), elem bytes each; a dense packing (pk 0) expands them
 * with zeros. The same bytes as sstream_pack_bits of their dense form. */
void sstream_pack_kept(uint32_t pk, const uint8_t *bits, uint64_t at, const void *vals,
                       uint64_t count, uint64_t kept, uint32_t elem, void *out);

/* The values of a payload that passed sstream_check, gathered into vals in
 * order, where they must be exactly the elements that bits at..at+count-1
 * keep (of a dense payload: its elements there). Returns the number of
 * values, or -EINVAL with the first element where the index and the bits
 * differ in err. */
int64_t sstream_take_kept(uint32_t pk, uint64_t count, uint64_t kept, uint32_t elem,
                          const void *payload, const uint8_t *bits, uint64_t at, void *vals,
                          char *err, size_t errlen);

/* A payload of len bytes as a chunk of count elements, kept of them,
 * packed as pk: the length its packing gives; a bitmask that sets kept
 * bits and none past count; positions below count, strictly rising; the
 * index's padding zeros.
 * Returns 0, or -EINVAL with the reason in err. */
int sstream_check(uint32_t pk, uint64_t count, uint64_t kept, uint32_t elem, const void *payload,
                  uint64_t len, char *err, size_t errlen);

/* Expands a payload that passed sstream_check into count dense elements at
 * dst (which does not overlap it): the kept ones in their places, exact
 * zeros elsewhere. */
void sstream_expand(uint32_t pk, uint64_t count, uint64_t kept, uint32_t elem, const void *payload,
                    void *dst);

/* Records which of the chunk's count elements a payload that passed
 * sstream_check keeps, as bits at..at+count-1 of bits (bit i%8 of byte
 * i/8): 1 kept, 0 not; every one for a dense payload. */
void sstream_mark(uint32_t pk, uint64_t count, uint64_t kept, const void *payload, uint8_t *bits,
                  uint64_t at);

/* Whether packing and expanding take the processor's vector path
 * (AVX-512 F, BW and VL: 16 elements a step) where it has one: on by
 * default; off (false) for tests to compare with the plain loops, which
 * give the same bytes. Returns whether it is taken now. */
bool sstream_simd(bool on);

/* The name of a packing, for messages ("dense", "bitmask", ...). */
const char *sstream_name(uint32_t pk);
