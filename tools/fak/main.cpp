// The fak command: dispatches to one subcommand per file. Errors are caught here, printed once.
#include <cstdio>

int main(int argc, char** argv) {
  std::puts("fak: under construction");
  return 0;
}
