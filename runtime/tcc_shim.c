/* Linked into libattnc.so only.  Debian ships libtcc as a non-PIC static
 * archive whose code refers to three glibc variables PC-relatively, which
 * a shared object cannot do.  These hidden stand-ins satisfy those
 * references inside the library.  tcc touches them only to print
 * diagnostics with no error callback (attnc always installs one) and in
 * tcc_run (never called), so they are never read. */
void *stdout __attribute__((visibility("hidden"))) = 0;
void *stderr __attribute__((visibility("hidden"))) = 0;
char **environ __attribute__((visibility("hidden"))) = 0;
