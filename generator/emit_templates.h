/* emit_templates.h: the CUDA templates compiled into the library (build/templates.c, made by embed.c). */
#ifndef FG_EMIT_TEMPLATES_H
#define FG_EMIT_TEMPLATES_H

typedef struct fg_template {
    const char *name; /* path under templates/, e.g. "forward_mma.cuh" */
    const char *text; /* the file's contents */
} fg_template;

extern const fg_template fg_templates[];
extern const int fg_template_count;

#endif
