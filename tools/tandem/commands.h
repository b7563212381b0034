// Sub-commands of the `tandem` program. Each returns the process exit code.
#pragma once

namespace tandem::cli {

int cmd_generate(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_distill(int argc, char** argv);

}  // namespace tandem::cli
