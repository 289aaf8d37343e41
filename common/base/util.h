/* Small macros every part uses. */
#pragma once

#include <stddef.h>

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
