#include <benchmark/benchmark.h>
#include "bulwark/circuit_breaker.h"
static void BM_Placeholder(benchmark::State& s) { for (auto _ : s) benchmark::ClobberMemory(); }
BENCHMARK(BM_Placeholder);
