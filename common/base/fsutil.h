/* File system helpers. */
#pragma once

/* Creates path and its missing parents with mode 0755 (like mkdir -p).
 * Returns 0 or a negative errno. */
int fsutil_mkdir_p(const char *path);
