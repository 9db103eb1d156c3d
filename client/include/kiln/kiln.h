/* The C ABI of libkiln_client: the ops on DLPack tensors, for any language with a C FFI.
 * The common part (kiln_status, kiln_last_error, the version, the daemon connection) is in
 * kiln/c_abi.h; each op family's functions are in its header (kiln/ops/<family>.h), all
 * included here through kiln/ops/all.h, which the build generates from that folder; the
 * collectives are in kiln/comm.h.
 *
 *   DLTensor x = ..., w = ..., y = ...;   // kDLCUDA tensors, fp32/fp16/bf16, lanes 1
 *   if (kiln_rms_norm(&y, &x, &w, 1e-6, stream) != KILN_OK)
 *     fprintf(stderr, "rms_norm: %s\n", kiln_last_error());
 */
#ifndef KILN_KILN_H_
#define KILN_KILN_H_

#include "kiln/c_abi.h"
#include "kiln/comm.h"
#include "kiln/ops/all.h"

#endif /* KILN_KILN_H_ */
