#include <cstdio>
int main() { std::puts("lattice: under construction"); return 0; }
