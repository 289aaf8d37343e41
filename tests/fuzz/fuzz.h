/* What every fuzz target defines: the one entry point libFuzzer calls with
 * each input (in the fuzzing build) and replay.c calls with each file of the
 * target's corpus (in every other build). A bug shows as a crash, an abort
 * or a sanitizer report; the return value is always 0. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the code under test does not hold: report and abort, so
 * that both libFuzzer and the replay test see a crash. */
#define FUZZ_ASSERT(cond)                                                                      \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);      \
            abort();                                                                           \
        }                                                                                      \
    } while (0)
