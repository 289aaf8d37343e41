/* CRC-32C (Castagnoli), as TFRecord framing uses it. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of len bytes. */
uint32_t crc32c(const void *data, size_t len);
/* TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t crc32c_masked(const void *data, size_t len);
