/* Subcommands of the wgml program: each takes argc/argv starting at its own name and
   returns the process exit status. */
#ifndef WGML_TOOLS_COMMANDS_H
#define WGML_TOOLS_COMMANDS_H

int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_finetune(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_eval(int argc, char **argv);

#endif
