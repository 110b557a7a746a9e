# tokenmill_target_warnings(target): warnings on for our own code only.
function(tokenmill_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${TOKENMILL_WERROR}>>:-Werror>)
endfunction()
