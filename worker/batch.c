/* A stripe of rows cut out of a batch (batch.h). */
#include "batch.h"

#include <string.h>

size_t batch_stripe(uint8_t *buf, const batch_layout *l, uint64_t r0, uint64_t rows)
{
    if (rows == 0 || r0 + rows > l->h)
        return 0;
    size_t row = l->w * l->input_size, plane = l->h * row, part = rows * row;
    for (uint64_t p = 0; p < l->n * l->c; p++) /* every destination is at or before its source */
        memmove(buf + p * part, buf + p * plane + r0 * row, part);
    uint8_t *lab = buf + l->n * l->c * plane, *to = buf + l->n * l->c * part;
    size_t lrow = l->w * l->label_size;
    for (uint64_t s = 0; s < l->n; s++)
        memmove(to + s * rows * lrow, lab + (s * l->h + r0) * lrow, rows * lrow);
    return l->n * l->c * part + l->n * rows * lrow;
}
