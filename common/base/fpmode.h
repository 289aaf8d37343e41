/* The floating-point mode every thread that computes runs in. */
#pragma once

/* Flushes subnormal results to zero and reads subnormal operands as zero
 * (x86's FTZ and DAZ; nothing elsewhere) on the calling thread; threads it
 * starts afterwards inherit the mode. A training run whose gradients
 * shrink into the subnormal range otherwise slows down a hundredfold in
 * the GEMMs (each such operand takes a microcode assist), and values below
 * 1.2e-38 carry nothing a float32 weight can use. Every daemon sets it
 * before its first thread, so that a replica's update and memoryx's
 * shadow update of the same weights stay bit for bit the same. */
void fpmode_flush_subnormals(void);
