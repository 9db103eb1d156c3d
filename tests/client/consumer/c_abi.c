/* The C ABI from C: kiln.h compiles as C, and its functions link and answer. */
#include <stdio.h>
#include <string.h>

#include <kiln/kiln.h>

int check_c_abi(void) {
  if (strcmp(kiln_version(), KILN_VERSION_STRING) != 0) {
    fprintf(stderr, "kiln_version() %s != KILN_VERSION_STRING %s\n", kiln_version(), KILN_VERSION_STRING);
    return 1;
  }
  if (kiln_rms_norm(NULL, NULL, NULL, 1e-6, NULL) != KILN_ERROR_INVALID_ARGUMENT) return 1;
  if (strstr(kiln_last_error(), "kiln_rms_norm: out: the DLTensor pointer is NULL") == NULL) {
    fprintf(stderr, "unexpected error: %s\n", kiln_last_error());
    return 1;
  }
  printf("C: %s: %s\n", kiln_status_name(KILN_ERROR_INVALID_ARGUMENT), kiln_last_error());
  return 0;
}
