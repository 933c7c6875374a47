/* validate.h: which specs flashgen refuses (validate.c), as one flat list of named rules, each with the
 * sentence it answers with; and the per-arch limits the rules and the runtime share. */
#ifndef FG_VALIDATE_H
#define FG_VALIDATE_H

#include <stddef.h>
#include "core/error.h"

struct fg_spec; /* generator/spec.h */

/* The largest dynamic shared memory per block on `arch` (opt-in), in bytes; 0 if the arch is unknown. */
size_t arch_smem_limit(int arch);

/* Checks every refusal rule; on the first broken rule returns FG_ERR_UNSUPPORTED (or
 * FG_ERR_INVALID_ARGUMENT for malformed values) with the rule's sentence. Tile fields must be set. */
fg_status spec_validate(const struct fg_spec *spec, fg_error *err);

/* The rules, for tests and `flashgen --help`: count and names. */
int spec_rule_count(void);
const char *spec_rule_name(int i);

#endif
