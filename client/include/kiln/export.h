// KILN_API: marks what libkiln_client exports; everything else in the library is hidden.
#ifndef KILN_EXPORT_H_
#define KILN_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#endif  // KILN_EXPORT_H_
