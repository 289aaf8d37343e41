/* The wse-node's unit tests' MLPs compiled (mlp.h). */
#include "mlp.h"

#include <check.h>
#include <string.h>

#include "toml.h"

model *mlp_compile(const char *text)
{
    char err[256];
    toml_value *root = toml_parse(text, strlen(text), "m.toml", err, sizeof(err));
    ck_assert_msg(root != NULL, "%s", err);
    model *m = model_compile_document(root, err, sizeof(err));
    ck_assert_msg(m != NULL, "%s", err);
    toml_free(root);
    return m;
}
