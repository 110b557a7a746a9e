


userHi