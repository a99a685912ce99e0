/* icuuc.dll for the smoke test's Wine prefix only: Windows 10 (1903+) and 11 ship ICU as
 * icuuc.dll in System32 and Qt6Core.dll imports its converter functions (ucnv_*, used by
 * QStringConverter for legacy 8-bit encodings); Wine 8.0 has no icuuc.dll, so no Qt program
 * starts there. This one knows no converters: ucnv_open fails with U_FILE_ACCESS_ERROR and
 * ucnv_countAvailable is 0, so Qt offers UTF-8/16/32 and Latin-1 only (its own codecs), which
 * is all DraftLens uses. Built by smoke_test.sh with mingw-w64; never installed or shipped. */
#include <stddef.h>
#include <stdint.h>

#define EXPORT __declspec(dllexport)
typedef int UErrorCode;
enum { U_FILE_ACCESS_ERROR = 4 };

static void *fail(UErrorCode *err) {
  if (err && *err <= 0) *err = U_FILE_ACCESS_ERROR;
  return NULL;
}

EXPORT void *ucnv_open(const char *name, UErrorCode *err) { (void)name; return fail(err); }
EXPORT const char *ucnv_getStandardName(const char *name, const char *standard, UErrorCode *err) {
  (void)name; (void)standard; return fail(err);
}
EXPORT int32_t ucnv_countAvailable(void) { return 0; }
EXPORT const char *ucnv_getAvailableName(int32_t n) { (void)n; return NULL; }
/* The rest take a converter, which ucnv_open never returns. */
EXPORT void ucnv_close(void *c) { (void)c; }
EXPORT void ucnv_reset(void *c) { (void)c; }
EXPORT int8_t ucnv_getMaxCharSize(const void *c) { (void)c; return 1; }
EXPORT const char *ucnv_getName(const void *c, UErrorCode *err) { (void)c; return fail(err); }
EXPORT void ucnv_getToUCallBack(const void *c, void **a, const void **b) { (void)c; *a = NULL; *b = NULL; }
EXPORT void ucnv_getFromUCallBack(const void *c, void **a, const void **b) { (void)c; *a = NULL; *b = NULL; }
EXPORT void ucnv_setToUCallBack(void *c, void *a, const void *b, void **d, const void **e, UErrorCode *err) {
  (void)c; (void)a; (void)b; (void)d; (void)e; fail(err);
}
EXPORT void ucnv_setFromUCallBack(void *c, void *a, const void *b, void **d, const void **e, UErrorCode *err) {
  (void)c; (void)a; (void)b; (void)d; (void)e; fail(err);
}
EXPORT void ucnv_cbToUWriteUChars(void *a, const uint16_t *s, int32_t n, int32_t o, UErrorCode *err) {
  (void)a; (void)s; (void)n; (void)o; fail(err);
}
EXPORT void ucnv_cbFromUWriteUChars(void *a, const uint16_t **s, const uint16_t *l, int32_t o, UErrorCode *err) {
  (void)a; (void)s; (void)l; (void)o; fail(err);
}
EXPORT void ucnv_toUnicode(void *c, uint16_t **t, const uint16_t *tl, const char **s, const char *sl,
                           int32_t *o, int8_t f, UErrorCode *err) {
  (void)c; (void)t; (void)tl; (void)s; (void)sl; (void)o; (void)f; fail(err);
}
EXPORT void ucnv_fromUnicode(void *c, char **t, const char *tl, const uint16_t **s, const uint16_t *sl,
                             int32_t *o, int8_t f, UErrorCode *err) {
  (void)c; (void)t; (void)tl; (void)s; (void)sl; (void)o; (void)f; fail(err);
}
EXPORT int32_t ucnv_toUCountPending(const void *c, UErrorCode *err) { (void)c; fail(err); return 0; }
EXPORT int32_t ucnv_fromUCountPending(const void *c, UErrorCode *err) { (void)c; fail(err); return 0; }
EXPORT void UCNV_FROM_U_CALLBACK_SUBSTITUTE(const void *c, void *a, const uint16_t *u, int32_t l, int32_t cp,
                                            int r, UErrorCode *err) {
  (void)c; (void)a; (void)u; (void)l; (void)cp; (void)r; (void)err;
}
EXPORT void UCNV_TO_U_CALLBACK_SUBSTITUTE(const void *c, void *a, const char *u, int32_t l, int r,
                                          UErrorCode *err) {
  (void)c; (void)a; (void)u; (void)l; (void)r; (void)err;
}
