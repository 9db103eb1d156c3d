/* The pkg-config twin of main.cpp: a C program built with `cc ... $(pkg-config --cflags --libs
 * kiln)` (pkg_config_consumer.sh), calling the C ABI's checks of c_abi.c. */
#include <stdio.h>

#include <kiln/kiln.h>

int check_c_abi(void);

int main(void) {
  if (check_c_abi() != 0) return 1;
  printf("kiln pkg-config consumer ok (kiln %s)\n", kiln_version());
  return 0;
}
