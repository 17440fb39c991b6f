# Writes OUT, a C file defining `const char NAME[]` with the bytes of IN and a NUL: the status
# page lives as HTML in the source tree and is compiled into sol-router at build time.
#   cmake -DIN=file.html -DOUT=file.c -DNAME=symbol -P embed_file.cmake
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(([^,]*,){16})" "\\1\n    " bytes "${bytes}")
file(WRITE "${OUT}.tmp" "/* Generated from ${IN} by embed_file.cmake: do not edit. */\n"
     "#include <stddef.h>\nconst char ${NAME}[] = {\n    ${bytes}0x00};\n"
     "const size_t ${NAME}_len = sizeof ${NAME} - 1;\n")
file(RENAME "${OUT}.tmp" "${OUT}")
