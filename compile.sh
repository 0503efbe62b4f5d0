echo fake build
