// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized (and
// -Wuninitialized) report inside the compiler's own headers (GCC bug 105593); nothing in fak reads
// an undefined value. Include first in a file compiled with AVX-512: the warnings are off for the
// rest of that file.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
