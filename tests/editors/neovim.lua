-- Neovim's own LSP client (0.7 and later) against `tfdoctor server`: open the file named by $TFDOCTOR_FILE,
-- wait for its diagnostics and print one line each ("line:column code message"), then quit.
local client_id = vim.lsp.start_client({
  name = "tfdoctor",
  cmd = { vim.env.TFDOCTOR_PYTHON, "-m", "tfdoctor", "server" },
  root_dir = vim.fn.getcwd(),
})
vim.cmd("edit " .. vim.fn.fnameescape(vim.env.TFDOCTOR_FILE))
vim.lsp.buf_attach_client(0, client_id)
local arrived = vim.wait(60000, function() return #vim.diagnostic.get(0) > 0 end, 50)
for _, d in ipairs(vim.diagnostic.get(0)) do
  local code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code) or "?"
  io.stdout:write(string.format("%d:%d %s %s\n", d.lnum + 1, d.col + 1, code, d.message))
end
io.stdout:write(arrived and "arrived\n" or "timed out\n")
vim.cmd("qa!")
