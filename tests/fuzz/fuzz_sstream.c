/* Fuzz target: packed weight and gradient chunks of sparse tensors
 * (common/wire/sstream.c) through the checks a receiver makes before
 * expanding one (msgcheck_weight_chunk or msgcheck_grad_chunk, then
 * msgcheck_weight_payload or msgcheck_grad_payload).
 *
 * Input: the packing (a byte, unknown values too), flags (a byte: bit 0
 * bfloat16 on the wire, bit 1 the tensor is sparse, bit 2 the backward
 * pass, bit 3 a checkpoint pass, bit 4 rigl rather than static, bit 5
 * sparsity.compressed_streams = false, bit 6 a gradient chunk), the
 * chunk's count, offset and kept (16 bits each, little-endian), then the
 * payload. The plan has one tensor of 64x64 elements and chunks of 4096. A
 * chunk that passes both checks is expanded into exactly count elements
 * twice, over zeros and over ones: both must agree (every byte written),
 * with at most kept elements nonzero. */
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "msgcheck.h"
#include "sstream.h"

#define SIDE 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    uint64_t dims[2] = {SIDE, SIDE};
    Appliance__PlanTensor t = APPLIANCE__PLAN_TENSOR__INIT, *tp = &t;
    t.dims = dims;
    t.n_dims = 2;
    t.sparsity = data[1] & 2 ? 0.9f : 0.0f;
    Appliance__Plan p = APPLIANCE__PLAN__INIT;
    p.tensors = &tp;
    p.n_tensors = 1;
    p.chunk_elems = SIDE * SIDE;
    p.wire_bf16 = data[1] & 1;
    Appliance__PlanSparsity sp = APPLIANCE__PLAN_SPARSITY__INIT;
    sp.type = data[1] & 16 ? "rigl" : "static";
    sp.dense_streams = data[1] & 32;
    p.sparsity = data[1] & 2 ? &sp : NULL;
    Appliance__WeightChunk w = APPLIANCE__WEIGHT_CHUNK__INIT;
    w.packing = (Appliance__Packing)(data[0] % 6);
    w.pass = data[1] & 8 ? APPLIANCE__PASS__PASS_CHECKPOINT
             : data[1] & 4 ? APPLIANCE__PASS__PASS_BACKWARD : APPLIANCE__PASS__PASS_FORWARD;
    w.count = (uint64_t)data[2] | (uint64_t)data[3] << 8;
    w.offset = (uint64_t)data[4] | (uint64_t)data[5] << 8;
    w.kept = (uint64_t)data[6] | (uint64_t)data[7] << 8;
    w.total = SIDE * SIDE;
    const uint8_t *pl = data + 8;
    uint32_t len = (uint32_t)(size - 8);
    char err[512];
    err[0] = '\0';
    Appliance__GradChunk g = APPLIANCE__GRAD_CHUNK__INIT;
    g.tensor_id = w.tensor_id;
    g.offset = w.offset;
    g.count = w.count;
    g.total = w.total;
    g.packing = w.packing;
    g.kept = w.kept;
    bool grad = data[1] & 64;
    const char *what = grad ? "gradient chunk of tensor" : "weight chunk of tensor";
    if ((grad ? msgcheck_grad_chunk(&g, &p, len, err, sizeof(err))
              : msgcheck_weight_chunk(&w, &p, len, err, sizeof(err))) < 0) {
        FUZZ_ASSERT(strncmp(err, what, strlen(what)) == 0);
        return 0;
    }
    FUZZ_ASSERT(w.offset + w.count <= SIDE * SIDE);
    FUZZ_ASSERT((uint32_t)w.packing == SSTREAM_DENSE || (t.sparsity > 0 && !sp.dense_streams));
    FUZZ_ASSERT(!grad || (uint32_t)w.packing == SSTREAM_DENSE || msgcheck_grads_pack(&p, 0));
    if ((grad ? msgcheck_grad_payload(&g, &p, pl, len, err, sizeof(err))
              : msgcheck_weight_payload(&w, &p, pl, len, err, sizeof(err))) < 0) {
        FUZZ_ASSERT((uint32_t)w.packing != SSTREAM_DENSE && strncmp(err, what, strlen(what)) == 0);
        return 0;
    }
    uint32_t elem = msgcheck_wire_elem(&p);
    size_t bytes = (size_t)w.count * elem;
    uint8_t *a = malloc(bytes ? bytes : 1), *b = malloc(bytes ? bytes : 1);
    FUZZ_ASSERT(a && b);
    memset(a, 0, bytes);
    memset(b, 0xff, bytes);
    sstream_expand((uint32_t)w.packing, w.count, w.kept, elem, pl, a);
    sstream_expand((uint32_t)w.packing, w.count, w.kept, elem, pl, b);
    FUZZ_ASSERT(memcmp(a, b, bytes) == 0);
    if ((uint32_t)w.packing != SSTREAM_DENSE) {
        uint64_t nonzero = 0;
        for (uint64_t i = 0; i < w.count; i++) {
            uint8_t any = 0;
            for (uint32_t k = 0; k < elem; k++)
                any |= a[i * elem + k];
            nonzero += any != 0;
        }
        FUZZ_ASSERT(nonzero <= w.kept && len < bytes);
    }
    free(a);
    free(b);
    return 0;
}
