/* CRC-32C, table-driven (reflected polynomial 0x82f63b78). */
#include "crc32c.h"

static uint32_t crc32c__table[256];
static int crc32c__ready;

static void crc32c__init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc32c__table[i] = c;
    }
    crc32c__ready = 1;
}

uint32_t crc32c(const void *data, size_t len)
{
    if (!crc32c__ready)
        crc32c__init();
    const uint8_t *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < len; i++)
        c = crc32c__table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

uint32_t crc32c_masked(const void *data, size_t len)
{
    uint32_t c = crc32c(data, len);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
