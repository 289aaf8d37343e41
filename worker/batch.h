/* A batch's bytes as the worker sends them (sample.h's layout: every
 * sample's input planes, then every sample's labels), and the cut of a
 * stripe of rows out of them for spatial partitions. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* n samples of c planes of h x w inputs of input_size bytes each, and a
 * label of label_size bytes per pixel. */
typedef struct batch_layout {
    uint64_t n, c, h, w;
    size_t input_size, label_size;
} batch_layout;

/* Keeps, in place, rows [r0, r0 + rows) of each input plane and of each
 * sample's labels of the batch at buf, packed as a batch of images rows
 * tall, and returns the bytes that remain; 0 (buf untouched) when the rows
 * are not the images'. */
size_t batch_stripe(uint8_t *buf, const batch_layout *l, uint64_t r0, uint64_t rows);
