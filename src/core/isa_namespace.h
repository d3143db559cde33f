// FAK_ISA_NS: an inline namespace per instruction set, for inline helpers in headers that kernel
// files compiled with wider ISA flags (*_avx2.cpp, *_avx512.cpp) include.
//
// note: an inline function is emitted as a weak (COMDAT) copy in every object that uses it, and the
// linker keeps one of them. Without a namespace per ISA, the copy kept could be the one compiled
// with AVX-512 and then run, uninlined, on a CPU without it. CMake defines FAK_ISA_NS per kernel
// file (isa_avx2, isa_avx512); everything else gets isa_base. For the same reason kernel files take
// scratch memory from ops/scratch.h instead of instantiating std containers.
#pragma once

#ifndef FAK_ISA_NS
#define FAK_ISA_NS isa_base
#endif
