/* A shared library whose initial-exec TLS takes most of glibc's static TLS surplus when dlopened
 * (tests/attach.rs: an attach that finds no room left must say how to make some). */
__attribute__((tls_model("initial-exec"))) __thread char hog[HOG_BYTES];

char *hog_here(void) { return hog; }
