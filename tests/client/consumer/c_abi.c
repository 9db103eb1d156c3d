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
  {
    const kiln_llama31_rope_scaling llama31 = {8.0, 1.0, 4.0, 8192};
    if (kiln_apply_rope(NULL, NULL, NULL, 0, 0, 500000.0, &llama31, NULL) != KILN_ERROR_INVALID_ARGUMENT ||
        kiln_apply_rope_with_cos_sin_cache(NULL, NULL, NULL, NULL, 0, NULL) != KILN_ERROR_INVALID_ARGUMENT) {
      fprintf(stderr, "rope ops: unexpected status: %s\n", kiln_last_error());
      return 1;
    }
  }
  if (kiln_silu_and_mul(NULL, NULL, NULL) != KILN_ERROR_INVALID_ARGUMENT ||
      kiln_gelu_and_mul(NULL, NULL, NULL) != KILN_ERROR_INVALID_ARGUMENT ||
      kiln_gelu_tanh_and_mul(NULL, NULL, NULL) != KILN_ERROR_INVALID_ARGUMENT) {
    fprintf(stderr, "activation ops: unexpected status: %s\n", kiln_last_error());
    return 1;
  }
  {
    const DLDataType bf16 = {kDLBfloat, 16, 1};
    const int32_t indptr[2] = {0, 1}, last[1] = {1};
    kiln_batch_decode_plan* plan = NULL;
    if (kiln_batch_decode_plan_create(indptr, last, 1, 32, 8, 96, 16, bf16, 0.0, 0.0, -1, -1, &plan) !=
            KILN_ERROR_INVALID_ARGUMENT ||
        plan != NULL || kiln_batch_decode_plan_workspace_bytes(NULL) != 0 ||
        kiln_batch_decode(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL) !=
            KILN_ERROR_INVALID_ARGUMENT ||
        kiln_append_paged_kv(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL) !=
            KILN_ERROR_INVALID_ARGUMENT) {
      fprintf(stderr, "decode ops: unexpected status: %s\n", kiln_last_error());
      return 1;
    }
    kiln_batch_decode_plan_destroy(NULL);
  }
  return 0;
}
