/* Assertions for loops over many elements. Check's ck_assert_* record the
 * location of every assertion that passes (a write to its message file):
 * over millions of elements that is most of a test's time, and several
 * times more under the sanitizers. ck_check asserts the same and writes
 * nothing unless it fails (the condition is evaluated twice then, so it
 * must have no side effects). */
#ifndef APPLIANCE_TESTS_CHECK_LOOP_H
#define APPLIANCE_TESTS_CHECK_LOOP_H

#include <check.h>

#define ck_check(expr, ...)                                                                        \
    do {                                                                                           \
        if (!(expr))                                                                               \
            ck_assert_msg((expr), __VA_ARGS__);                                                    \
    } while (0)

#endif
