/* UTF-8 for messages that end up in JSON strings (which must be UTF-8):
 * text that quotes a client or a path, or that was cut at a byte count. */
#ifndef MOAT_BASE_UTF8_H
#define MOAT_BASE_UTF8_H

#include <stddef.h>

/* The length of the valid UTF-8 sequence at s (n bytes left), 0 if none
 * (overlong forms, surrogates and code points past U+10FFFF are invalid). */
size_t moat_utf8_seq(const unsigned char *s, size_t n);

/* In place: every byte of s that does not start a valid sequence becomes
 * '?'. Returns s. */
char *moat_utf8_clean(char *s);

#endif
