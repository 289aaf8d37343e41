/* The Cerebras Model Zoo's way of writing a job, made the appliance's own
 * in the parsed document before it is read (jobspec_parse, for TOML and
 * YAML alike, so that every daemon that compiles the job again does the
 * same):
 *
 * - the model's input shape from train_input.image_shape ([H, W, C]) and
 *   model.input_channels when [model] gives no input_shape;
 * - a [model] without layers, written with the Model Zoo's U-Net keys
 *   (encoder_filters, decoder_filters, convs_per_block, ...), replaced by
 *   the layers the Model Zoo's U-Net builds, named as its modules are
 *   (encoder.unet_blocks.0.layers.0.conv, ...), so that a checkpoint's
 *   tensors line up with its state dict. docs/job-file.md lists the keys. */
#pragma once

#include <stddef.h>

#include "toml.h"

/* Rewrites root as above. Returns 0 (nothing to do is fine), or -EINVAL
 * with "FILE:LINE:COL: message" in err (a key the template does not know,
 * with the nearest it does; a value it cannot build). */
int modelzoo_prepare(toml_value *root, char *err, size_t errlen);

/* Whether a [model] table is written with the U-Net template's keys. */
bool modelzoo_is_unet(const toml_value *model_table);
