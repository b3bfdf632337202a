# Turns the STEP BY STEP example of include/wgml.h into a C program that runs it and checks
# its result, so the header's own example is compiled (and run) by the test suite.
#   cmake -DHEADER=include/wgml.h -DOUT=header_example.c -P cmake/header_example.cmake
file(READ "${HEADER}" text)
string(FIND "${text}" "STEP BY STEP" start)
string(FIND "${text}" "EXECUTION MODEL" stop)
if(start LESS 0 OR stop LESS start)
    message(FATAL_ERROR "${HEADER}: no STEP BY STEP section before EXECUTION MODEL")
endif()
math(EXPR len "${stop} - ${start}")
string(SUBSTRING "${text}" ${start} ${len} section)
# the example is the block indented by four spaces after " * " (semicolons are list
# separators to CMake: they travel as a placeholder while the text is a list of lines)
string(REPLACE ";" "@SEMICOLON@" section "${section}")
string(REPLACE "\n" ";" lines "${section}")
set(code "")
foreach(line IN LISTS lines)
    if(line MATCHES "^ \\*     (.*)$")
        string(APPEND code "    ${CMAKE_MATCH_1}\n")
    endif()
endforeach()
string(REPLACE "@SEMICOLON@" ";" code "${code}")
if(code STREQUAL "")
    message(FATAL_ERROR "${HEADER}: the STEP BY STEP section has no indented example")
endif()
file(WRITE "${OUT}" "/* Generated from the STEP BY STEP example of include/wgml.h by cmake/header_example.cmake. */
#include \"wgml.h\"

#include <stdio.h>

static float host_a[1000], host_b[1000], host_c[1000];

static int example(void)
{
${code}    return 0;
}

int main(void)
{
    for (int i = 0; i < 1000; i++) {
        host_a[i] = (float)i * 0.5f;
        host_b[i] = (float)(i % 7) - 3.0f;
        host_c[i] = -1e30f;
    }
    if (example() != 0) return 1;
    for (int i = 0; i < 1000; i++)
        if (host_c[i] != host_a[i] + host_b[i]) {
            printf(\"header example: c[%d] = %g, not %g\\n\", i, host_c[i], host_a[i] + host_b[i]);
            return 1;
        }
    printf(\"header example: 1000 sums right\\n1 passed, 0 failed\\n\");
    return 0;
}
")
