"


userHi0